package events

import "os"

// DefaultSource is the CloudEvents source a service stamps unless told
// otherwise: "e31/SERVICE/HOST", so that a reader of the log can tell the
// instances on different machines apart.
func DefaultSource(service string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "e31/" + service
	}
	return "e31/" + service + "/" + host
}
