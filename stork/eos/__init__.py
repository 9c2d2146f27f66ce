"""The Estimation and Optimization Service: models, sampling, samplers, history, service."""
