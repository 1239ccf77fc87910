package jobfile

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/e31net/e31/pkg/events"
)

// Validate checks a normalized spec: the rules of the job file applied to
// events.JobSpec, with every staged input resolved. It is what SUBMIT runs
// on a spec from the bus, which any publisher may have written, so it
// assumes nothing: no defaults are filled in, every number is bounded,
// every string is checked. Data entries must carry a Digest and Kind (staged
// data) or a FromJob (an earlier job's output), not both.
//
// Problems are reported by the spec's JSON field paths
// ("request.memory_bytes", "data[0].digest"), without file or position.
// A nil error means the spec is fine; otherwise it is an *Error.
func Validate(spec events.JobSpec) error {
	ps := &problems{}
	fail := func(path, msg string) { ps.add(0, 0, path, msg) }

	if why := checkLabel(spec.Name); why != "" {
		fail("name", why)
	}

	w := spec.Work
	if len(w.Command) == 0 {
		fail("work.command", "required ("+wantCommand+")")
	}
	for i, a := range w.Command {
		if why := checkArg(i, a); why != "" {
			fail("work.command["+strconv.Itoa(i)+"]", why)
		}
	}
	// Sorted, so that the same spec always gives the same message.
	for _, k := range slices.Sorted(maps.Keys(w.Env)) {
		p := joinKey("work.env", k)
		if why := checkEnvName(k); why != "" {
			fail(p, why)
		} else if why := checkEnvValue(k, w.Env[k]); why != "" {
			fail(p, why)
		}
	}
	if why := checkExecBytes(w.Command, w.Env); why != "" {
		fail("work", why)
	}
	if w.Image != "" {
		if why := checkImage(w.Image); why != "" {
			fail("work.image", why)
		}
	}

	if why := checkPriority(float64(spec.Priority)); why != "" {
		fail("priority", why)
	}
	if len(spec.After) > MaxAfter {
		fail("after", fmt.Sprintf("has %d entries, more than %d", len(spec.After), MaxAfter))
	}
	seenAfter := map[string]bool{}
	for i, id := range spec.After {
		p := "after[" + strconv.Itoa(i) + "]"
		if why := checkFromJob(id); why != "" {
			fail(p, why)
		} else if seenAfter[id] {
			fail(p, quote(id)+" is listed twice")
		}
		seenAfter[id] = true
	}
	if sw := spec.Sweep; sw != nil {
		switch {
		case !events.ValidID(sw.ID):
			fail("sweep.id", quote(sw.ID)+" is not a valid id")
		case sw.Count < 1 || sw.Count > MaxSweep:
			fail("sweep.count", fmt.Sprintf("must be from 1 to %d, got %d", MaxSweep, sw.Count))
		case sw.Index < 0 || sw.Index >= sw.Count:
			fail("sweep.index", fmt.Sprintf("must be from 0 to %d, got %d", sw.Count-1, sw.Index))
		}
		if why := checkSweepValue(sw.Value); why != "" {
			fail("sweep.value", why)
		}
	}

	if len(spec.Data) > MaxData {
		fail("data", fmt.Sprintf("has %d entries, more than %d", len(spec.Data), MaxData))
	} else {
		validateData(spec.Data, fail)
	}

	q := spec.Request
	if why := checkCPU(q.CPU); why != "" {
		fail("request.cpu", why)
	}
	if why := checkMemory(q.MemoryBytes); why != "" {
		fail("request.memory_bytes", why)
	}
	if why := checkGPU(float64(q.GPU)); why != "" {
		fail("request.gpu", why)
	}
	if why := checkDisk(q.DiskBytes); why != "" {
		fail("request.disk_bytes", why)
	}
	if why := checkLimit(q.LimitSeconds); why != "" {
		fail("request.limit_seconds", why)
	}

	validateRetention(spec, fail)
	validateCheckpoint(spec, fail)

	if len(spec.Output) > MaxOutputs {
		fail("output", fmt.Sprintf("has %d entries, more than %d", len(spec.Output), MaxOutputs))
	} else {
		first := make(map[string]int)
		for i, o := range spec.Output {
			p := "output[" + strconv.Itoa(i) + "].path"
			if why := checkOutputPath(o.Path); why != "" {
				fail(p, why)
			} else if at, dup := first[o.Path]; dup {
				fail(p, fmt.Sprintf("%s is already declared by output[%d]", quote(o.Path), at))
			} else {
				first[o.Path] = i
			}
		}
	}
	return ps.err()
}

func validateData(data []events.DataRef, fail func(path, msg string)) {
	first := make(map[string]int)
	for i, d := range data {
		p := "data[" + strconv.Itoa(i) + "]"
		if why := checkDataName(d.Name); why != "" {
			fail(p+".name", why)
		} else if at, dup := first[d.Name]; dup {
			fail(p+".name", fmt.Sprintf("%s is already the name of data[%d]", quote(d.Name), at))
		} else {
			first[d.Name] = i
		}
		staged := d.Digest != "" || d.Kind != ""
		switch {
		case d.CheckpointOf != "" && (staged || d.FromJob != ""):
			fail(p, "has checkpoint_of and a digest or from_job (give one)")
		case d.CheckpointOf != "":
			if why := checkFromJob(d.CheckpointOf); why != "" {
				fail(p+".checkpoint_of", why)
			}
		case d.FromJob != "" && staged:
			fail(p, "has both from_job and a digest (give one)")
		case d.FromJob != "":
			if why := checkFromJob(d.FromJob); why != "" {
				fail(p+".from_job", why)
			}
		case !staged:
			fail(p, "needs a digest and kind (staged data), from_job (an earlier job's output) or checkpoint_of (an earlier job's last checkpoint)")
		default:
			if why := checkDigest(d.Digest); why != "" {
				fail(p+".digest", why)
			}
			if why := checkKind(d.Kind); why != "" {
				fail(p+".kind", why)
			}
		}
		if d.Bytes < 0 {
			fail(p+".bytes", "must not be negative, got "+strconv.FormatInt(d.Bytes, 10))
		}
		if d.Files < 0 {
			fail(p+".files", "must not be negative, got "+strconv.Itoa(d.Files))
		}
	}
}
