package executor

import (
	"path/filepath"
	"sort"
)

// DefaultPath is a job's PATH unless it declares one, whichever executor
// runs it: a job must find the same tools in the sandbox, in a container
// and as a plain process.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

// Places are a job's directories as the job sees them: /data, /out and
// /tmp inside the sandbox or a container, the workspace's host paths for a
// plain process.
type Places struct {
	Data, Out string
	// Home is HOME unless the job declares one.
	Home string
	// Tmp is TMPDIR unless the job declares one; "" leaves it unset (the
	// system's /tmp).
	Tmp string
}

// Inside are the places of a job that runs in a root of its own (the
// sandbox, a container): its data at /data, its output at /out, and /tmp
// for HOME and TMPDIR.
var Inside = Places{Data: "/data", Out: "/out", Home: "/tmp", Tmp: "/tmp"}

// Environ is a job's environment, one variable a name, sorted by name: the
// declared variables; PATH (DefaultPath), HOME and TMPDIR unless declared;
// and E31_JOB_ID, E31_DATA and E31_OUTPUT, which a declaration cannot
// override, so that a job always finds its own directories.
func Environ(spec Spec, at Places) []string {
	vars := make(map[string]string, len(spec.Env)+6)
	vars["PATH"], vars["HOME"] = DefaultPath, at.Home
	if at.Tmp != "" {
		vars["TMPDIR"] = at.Tmp
	}
	for k, v := range spec.Env {
		vars[k] = v
	}
	vars["E31_JOB_ID"] = spec.JobID
	vars["E31_DATA"] = at.Data
	vars["E31_OUTPUT"] = at.Out
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, len(keys))
	for i, k := range keys {
		env[i] = k + "=" + vars[k]
	}
	return env
}

// SearchPath is where the job's command is looked for: the directories of
// the PATH Environ gives it.
func SearchPath(spec Spec) []string {
	if p, ok := spec.Env["PATH"]; ok {
		return filepath.SplitList(p)
	}
	return filepath.SplitList(DefaultPath)
}
