"""The run wing: a resolved plan in, records out (plan -> world -> loop -> probes -> records).

See docs/architecture.md."""
