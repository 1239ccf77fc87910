package client

import (
	"os"
	osuser "os/user"
	"strings"
)

// OSUser is the user running this process ($USER, else the OS's account),
// as a Config.User: one token of letters, digits, '-' and '_', as it ends
// subjects (e31.job.<id>.requested.<user>), anything else made '_'.
// "anonymous" if there is none.
func OSUser() string {
	user := os.Getenv("USER")
	if user == "" {
		if u, err := osuser.Current(); err == nil {
			user = u.Username
		} else {
			user = "anonymous"
		}
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, user)
}
