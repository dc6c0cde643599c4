"""Reports on what to do and what was done: recommendations (and their findings and plan),
quota proposals, and the controller's decisions."""
