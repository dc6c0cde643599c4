"""sits_observe's Streamlit app: ``streamlit run dashboards/app.py -- --db FILE`` (or
``-- --service URL --token-file F``), or ``sits-observe ui``. See docs/ui.md."""

from sits_observe.surfaces.ui.app import main

main()
