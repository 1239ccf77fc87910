//go:build !(nvml && cgo)

package gpu

// OpenProbe opens NVML; this build has none (see ErrNoNVML).
func OpenProbe() (Probe, error) { return nil, ErrNoNVML }
