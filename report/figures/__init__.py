"""plotly figures of the reports (needs the `report` extra)."""
