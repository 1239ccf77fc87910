package rent

import "flag"

// Flags defines on fs the flags that set c: the instance's name and the
// lapse margin.
func (c *Config) Flags(fs *flag.FlagSet) {
	// Each instance reads the log on a consumer named after it: two
	// instances on one host need names of their own.
	fs.StringVar(&c.Instance, "instance", "", "this instance's name, for its consumer of the log (default: the host name; give each instance on one host its own)")
	fs.DurationVar(&c.LapseMargin, "lapse-margin", 0, "how long after a node's lease is seen gone RENT waits before it counts the node lost and holds its jobs again: room for clock drift between the node and the NATS servers (default a fifth of the lease TTL)")
}
