"""Page entry point (st.navigation runs this file); the view lives in ui.views.export."""
from ui.views.export import render

render()
