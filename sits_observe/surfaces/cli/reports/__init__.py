"""The report commands: one generated command per report, the reads they share, their
output formats, and the heatmap's extra flags."""
