"""The simulated LLM inference servers: continuous batching calibrated on measured step times,
their request arrivals, how co-located pods slow them, and the checks of both."""
