"""Transfer-rate analytics (Sen, Rao et al., section IV): regression models of the rate as a
function of RTT and flows fitted to the transfer log or a CSV table (`table`), the three
families with their cross-validated figures (`models`), the generalization bound (`bound`)
and the pictures (`plot`). `stork_history analytics` is the command. scikit-learn and
matplotlib are imported only when a model is fitted or a picture drawn."""
