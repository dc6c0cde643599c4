"""The demo's composition root: the simulated cluster, the service, the scheduler model, the
controller and the Streamlit app, started together."""
