package submit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/limits"
)

// State is what SUBMIT knows about a request when it decides it: the
// submitter's limits, and what the adapter has read so far. Decide asks for
// the reads in order of cost, by returning nil while a field it needs is
// nil: Usage (a read of the log, from where the queue was) only for a
// declaration that is valid, and Refs (reads of the jobs it names and of
// the store) only for one within its quota, so that a flood of requests
// over a quota costs no reads of the store.
type State struct {
	// LogFull, if set, says why the log has no room for another job: it
	// has reached its reserve (events.LogNearlyFull), kept for the jobs
	// already accepted. Every request is then refused with it.
	LogFull string
	Limits  limits.Limits
	// Usage is what the submitter had before the request.
	Usage *limits.Usage
	// Refs is what the jobs and staged data the request names are.
	Refs *Refs
}

// Refs is what the adapter read about what a request names.
type Refs struct {
	// Owners is the submitter of each job in the request's After that
	// exists; a job missing here does not.
	Owners map[string]string
	// Outputs is what each job named by a from_job data ref returned.
	Outputs map[string]Output
	// Checkpoints is the last checkpoint of each job named by a
	// checkpoint_of data ref (never pending: a job still running is a
	// problem).
	Checkpoints map[string]Output
	// Staged is the problem with each staged input (a data ref without
	// from_job), by its index in the request's data; none: it is present
	// and intact.
	Staged map[int]string
}

// Output is what an earlier job's output is to a request that reads it: a
// data ref once the job has succeeded, pending while it has not finished,
// or the problem that keeps it from being used.
type Output struct {
	Ref     events.DataRef
	Pending bool
	Problem string
}

// Decide is SUBMIT's decision on the request for job: JobSubmitted, with
// the data it reads resolved, or JobRejected naming every problem found; or
// nil while st lacks what deciding needs (see State). It is a pure function
// of its input.
func Decide(job string, req *events.JobRequested, st State) events.Event {
	if st.LogFull != "" {
		// Refused first: a job accepted now would take the room that
		// the jobs accepted before need to finish.
		return &events.JobRejected{Reason: st.LogFull}
	}
	var problems []string
	if strings.TrimSpace(req.Submitter) == "" {
		problems = append(problems, "submitter: required")
	}
	if err := jobfile.Validate(req.Spec); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
	}
	if p := st.Limits.ImageProblem(req.Spec.Work.Image); p != "" {
		problems = append(problems, "work.image: "+p)
	}
	if len(problems) > 0 {
		return rejection(problems)
	}
	if st.Usage == nil {
		return nil
	}
	if reason := limits.Admit(st.Limits, *st.Usage); reason != "" {
		return &events.JobRejected{Reason: reason}
	}
	if st.Refs == nil {
		return nil
	}
	spec := req.Spec
	spec.Data = append([]events.DataRef(nil), req.Spec.Data...)
	spec.After = append([]string(nil), req.Spec.After...)
	for i, dep := range spec.After {
		if dep == job {
			problems = append(problems, fmt.Sprintf("after[%d]: a job cannot wait for itself", i))
			continue
		}
		if owner, ok := st.Refs.Owners[dep]; !ok || owner != req.Submitter {
			// Another submitter's job is, for this one, no job at all.
			problems = append(problems, fmt.Sprintf("after[%d]: no such job %s", i, dep))
		}
	}
	for i, ref := range spec.Data {
		where := fmt.Sprintf("data[%d] %q", i, ref.Name)
		if ref.CheckpointOf != "" {
			cp, ok := st.Refs.Checkpoints[ref.CheckpointOf]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: checkpoint_of %s: no such job", where, ref.CheckpointOf))
			case cp.Problem != "":
				problems = append(problems, where+": "+cp.Problem)
			default:
				resolved := cp.Ref
				resolved.Name, resolved.CheckpointOf = ref.Name, ref.CheckpointOf
				spec.Data[i] = resolved
			}
			continue
		}
		if ref.FromJob == "" {
			if p := st.Refs.Staged[i]; p != "" {
				problems = append(problems, where+": "+p)
			}
			continue
		}
		out, ok := st.Refs.Outputs[ref.FromJob]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: from_job %s: no such job", where, ref.FromJob))
		case out.Problem != "":
			problems = append(problems, where+": "+out.Problem)
		case out.Pending:
			// The earlier job has not finished: this one runs after it,
			// and RUN stages its output once it has succeeded.
			if !slices.Contains(spec.After, ref.FromJob) {
				spec.After = append(spec.After, ref.FromJob)
			}
		default:
			resolved := out.Ref
			resolved.Name, resolved.FromJob = ref.Name, ref.FromJob
			spec.Data[i] = resolved
		}
	}
	if len(problems) > 0 {
		return rejection(problems)
	}
	return &events.JobSubmitted{Submitter: req.Submitter, Spec: spec}
}

// Once decides a request at most once: ev, unless the job's log already
// shows it decided (or cancelled) after the request. A request delivered
// twice, or decided by another instance, records nothing more.
func Once(after []events.Envelope, ev events.Event) []events.Event {
	for _, e := range after {
		switch e.Event.(type) {
		case *events.JobSubmitted, *events.JobRejected, *events.JobCancelled:
			return nil
		}
	}
	return []events.Event{ev}
}

// maxReasonProblems bounds how many problems the one-line reason lists;
// Problems keeps them all.
const maxReasonProblems = 8

// rejection names every problem in the reason, which is what the hold
// record and `e31 status` show.
func rejection(problems []string) *events.JobRejected {
	r := &events.JobRejected{Reason: strings.Join(problems[:min(len(problems), maxReasonProblems)], "; ")}
	if len(problems) > maxReasonProblems {
		r.Reason += fmt.Sprintf("; and %d more", len(problems)-maxReasonProblems)
	}
	if len(problems) > 1 {
		r.Problems = problems
	}
	return r
}
