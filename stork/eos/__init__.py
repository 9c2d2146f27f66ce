"""The Estimation and Optimization Service: its requests and answers, the service (task
matrix, history, budget), the samplers that measure a path, its API and client. Its
numerics (throughput models, sampling rules, d-w probing) are the tuning layer's
(`stork.tuning`)."""
