"""Page entry point (st.navigation runs this file); the view lives in ui.views.cost."""
from ui.views.cost import render

render()
