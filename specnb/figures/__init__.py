"""Plotly figures: of runs (`runs`: acceptance, tokens per call, speed-up, timelines), of the
sampling maths (`maths`), of time per committed token (`time_per_token`) and of the cost model's
(α, c) map (`cost_map`), and their static pictures for committed notebooks (`snapshot`)."""
