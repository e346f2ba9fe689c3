"""One module per `blockplan` subcommand (see `blockplan.cli`)."""
