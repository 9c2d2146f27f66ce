"""Transfer-rate analytics drawn (`plot`): the regressions of section IV (Sen, Rao et al.)
live in the tuning layer (`stork.tuning.rate_table`, `rate_models`, `rate_bound`);
`stork_history analytics` is the command. matplotlib is imported only when a picture is
drawn."""
