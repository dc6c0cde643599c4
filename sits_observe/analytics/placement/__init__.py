"""The placement rules the scheduler extender runs in production: FGD's score, the device
plugin's GPU choice and the sits order. Pure (NumPy only); the lab's replay imports them,
never the reverse."""
