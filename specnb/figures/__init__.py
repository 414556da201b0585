"""Plotly figures: of runs (`runs`: acceptance, tokens per call, speed-up, timelines) and of the
sampling maths (`sampling`), and their static pictures for committed notebooks (`snapshot`)."""
