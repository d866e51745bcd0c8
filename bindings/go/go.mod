module pstate.dev/pstate

go 1.18
