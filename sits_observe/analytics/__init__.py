"""Analytics: pure functions over the store's tables (no Kubernetes, HTTP or Streamlit)."""
