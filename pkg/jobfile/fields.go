package jobfile

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/e31net/e31/pkg/events"
)

// The job file format, one table per mapping. To add a field (priority,
// after: [ids], sweep, …), add a row and the function that reads it; the
// walker reports unknown, duplicate and missing keys for every table alike.

var jobFields = []field[Job]{
	{"name", readName},
	{"work", readWork},
	{"data", readData},
	{"request", readRequest},
	{"output", readOutputs},
	{"priority", readPriority},
	{"after", readAfter},
	{"sweep", readSweep},
	{"wait_for_node", readWaitForNode},
	{"retention", readRetention},
	{"checkpoint", readCheckpoint},
}

// sweepEntry is the sweep: mapping while it is read.
type sweepEntry struct {
	values            []string
	valuesAt, countAt value
}

var sweepFields = []field[sweepEntry]{
	{"values", readSweepValues},
	{"count", readSweepCount},
}

var workFields = []field[events.Work]{
	{"command", readCommand},
	{"env", readEnv},
	{"image", readImage},
}

var requestFields = []field[events.Request]{
	{"cpu", readCPU},
	{"memory", readMemory},
	{"gpu", readGPU},
	{"disk", readDisk},
	{"limit", readLimit},
}

// dataEntry is one item of data: while it is read.
type dataEntry struct {
	// name, fromJob, checkpointOf and path are set when given and valid;
	// path resolved.
	name, fromJob, checkpointOf, path string
	// nameAt, pathAt, fromAt and cpAt are where each key's value is;
	// given() tells whether it was there.
	nameAt, pathAt, fromAt, cpAt value
}

var dataFields = []field[dataEntry]{
	{"name", readDataName},
	{"path", readDataPath},
	{"from_job", readFromJob},
	{"checkpoint_of", readCheckpointOf},
}

// outputEntry is one item of output: in its long form while it is read.
type outputEntry struct {
	decl   events.OutputDecl
	ok     bool  // path was given and is valid
	pathAt value // where the path is
}

var outputFields = []field[outputEntry]{
	{"path", readOutputPath},
	{"required", readRequired},
}

func readName(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	s, ok := r.text(v, "a short label")
	if !ok {
		return
	}
	if why := checkLabel(s); why != "" {
		r.fail(v, why)
		return
	}
	j.Spec.Name = s
}

func readWork(r *reader, v value, j *Job) {
	w := &j.Spec.Work
	if !readObject(r, v, workFields, w, "a mapping with command (and optionally env, image)") {
		return
	}
	// Each string was checked alone; together they must still fit execve.
	if why := checkExecBytes(w.Command, w.Env); why != "" {
		r.fail(v, why)
	}
}

// readCommand reads work.command: a list of strings, run as it is, or one
// string, run by /bin/sh -c, which is how people write a pipeline.
func readCommand(r *reader, v value, w *events.Work) {
	if !v.given() {
		r.fail(v, "required ("+wantCommand+")")
		return
	}
	if !isSequence(v.node) {
		s, ok := r.text(v, wantCommand)
		if !ok {
			return
		}
		if strings.TrimSpace(s) == "" {
			r.fail(v, "must not be empty ("+wantCommand+")")
			return
		}
		if why := checkExecString(s); why != "" {
			r.fail(v, why)
			return
		}
		w.Command = []string{"/bin/sh", "-c", s}
		return
	}
	items, _ := r.sequence(v, wantCommand)
	if len(items) == 0 {
		r.fail(v, "must not be empty ("+wantCommand+")")
		return
	}
	cmd := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := r.text(it, "a string")
		if !ok {
			continue
		}
		if why := checkArg(i, s); why != "" {
			r.fail(it, why)
			continue
		}
		cmd = append(cmd, s)
	}
	w.Command = cmd
}

func readEnv(r *reader, v value, w *events.Work) {
	if !v.given() {
		return
	}
	entries, ok := r.mapping(v, "a mapping of variable names to strings, e.g. {LANG: C}")
	if !ok {
		return
	}
	env := make(map[string]string, len(entries))
	keyAt := make(map[string]string, len(entries))
	for _, e := range entries {
		k, kv, ok := r.key(e, v.path)
		if !ok {
			continue
		}
		if why := checkEnvName(k); why != "" {
			r.fail(kv, why)
			continue
		}
		if first, dup := keyAt[k]; dup {
			r.fail(kv, "duplicate key (first given at "+first+")")
			continue
		}
		keyAt[k] = kv.pos()
		val := at(e.Value, kv.path)
		if val.line == 0 {
			val.line, val.col = kv.line, kv.col
		}
		s, ok := r.text(val, `a string (write "" for an empty one)`)
		if !ok {
			continue
		}
		if why := checkEnvValue(k, s); why != "" {
			r.fail(val, why)
			continue
		}
		env[k] = s
	}
	if len(env) > 0 {
		w.Env = env
	}
}

func readImage(r *reader, v value, w *events.Work) {
	if !v.given() {
		return
	}
	s, ok := r.text(v, "an image reference such as alpine:3.20")
	if !ok || s == "" {
		return
	}
	if why := checkImage(s); why != "" {
		r.fail(v, why)
		return
	}
	w.Image = s
}

func readData(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	items, ok := r.sequence(v, "a list of {name, path}, {name, from_job} or {name, checkpoint_of}")
	if !ok {
		return
	}
	if len(items) > MaxData {
		r.fail(v, fmt.Sprintf("has %d entries, more than %d", len(items), MaxData))
		return
	}
	first := make(map[string]int) // name → index of the entry that has it
	for i, it := range items {
		var d dataEntry
		if !readObject(r, it, dataFields, &d, "a mapping with name and one of path, from_job, checkpoint_of") {
			continue
		}
		switch n := countGiven(d.pathAt, d.fromAt, d.cpAt); {
		case n > 1:
			r.fail(it, "give one of path, from_job and checkpoint_of, not several")
		case n == 0:
			r.fail(it, "needs path (a local file or folder), from_job (the id of an earlier job) or checkpoint_of (the id of a job whose last checkpoint is staged)")
		}
		if d.name != "" {
			if at, dup := first[d.name]; dup {
				r.fail(d.nameAt, fmt.Sprintf("%s is already the name of data[%d]", quote(d.name), at))
			} else {
				first[d.name] = i
			}
		}
		if d.path != "" {
			j.Paths[len(j.Spec.Data)] = d.path
		}
		j.Spec.Data = append(j.Spec.Data, events.DataRef{Name: d.name, FromJob: d.fromJob, CheckpointOf: d.checkpointOf})
	}
}

func readDataName(r *reader, v value, d *dataEntry) {
	d.nameAt = v
	if !v.given() {
		r.fail(v, "required ("+wantDataName+")")
		return
	}
	s, ok := r.text(v, wantDataName)
	if !ok {
		return
	}
	if why := checkDataName(s); why != "" {
		r.fail(v, why)
		return
	}
	d.name = s
}

// readDataPath resolves a local path against the job file's folder, so that
// a job file means the same thing wherever the CLI is run from.
func readDataPath(r *reader, v value, d *dataEntry) {
	d.pathAt = v
	if !v.given() {
		return
	}
	s, ok := r.text(v, "a local file or folder")
	if !ok {
		return
	}
	switch {
	case s == "":
		r.fail(v, "must not be empty (a local file or folder)")
		return
	case strings.IndexByte(s, 0) >= 0:
		r.fail(v, "must not contain a NUL byte")
		return
	case s == "~" || strings.HasPrefix(s, "~/"):
		// The shell expands ~, a job file does not; better to say so than
		// to look for a folder named "~" next to the file.
		r.fail(v, "~ is not expanded in a job file (write the full path, or one relative to the job file)")
		return
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(r.dir, s)
	}
	d.path = filepath.Clean(s)
}

func readFromJob(r *reader, v value, d *dataEntry) {
	d.fromAt = v
	if !v.given() {
		return
	}
	s, ok := r.text(v, "a job id")
	if !ok {
		return
	}
	if why := checkFromJob(s); why != "" {
		r.fail(v, why)
		return
	}
	d.fromJob = s
}

// readCheckpointOf reads the job whose last checkpoint is staged: SUBMIT
// resolves it, as it does from_job.
func readCheckpointOf(r *reader, v value, d *dataEntry) {
	d.cpAt = v
	if !v.given() {
		return
	}
	s, ok := r.text(v, "a job id")
	if !ok {
		return
	}
	if why := checkFromJob(s); why != "" {
		r.fail(v, why)
		return
	}
	d.checkpointOf = s
}

// countGiven is how many of vs were given.
func countGiven(vs ...value) int {
	n := 0
	for _, v := range vs {
		if v.given() {
			n++
		}
	}
	return n
}

func readRequest(r *reader, v value, j *Job) {
	readObject(r, v, requestFields, &j.Spec.Request, "a mapping with limit (and optionally cpu, memory, gpu, disk)")
}

func readCPU(r *reader, v value, q *events.Request) {
	if !v.given() {
		return // DefaultCPU
	}
	c, ok := r.number(v, wantCPU)
	if !ok {
		return
	}
	if why := checkCPU(c); why != "" {
		r.fail(v, why)
		return
	}
	q.CPU = c
}

func readMemory(r *reader, v value, q *events.Request) {
	if !v.given() {
		return // DefaultMemory
	}
	n, ok := r.size(v, wantSize)
	if !ok {
		return
	}
	if why := checkMemory(n); why != "" {
		r.fail(v, why)
		return
	}
	q.MemoryBytes = n
}

func readGPU(r *reader, v value, q *events.Request) {
	if !v.given() {
		return // DefaultGPU
	}
	n, ok := r.number(v, wantGPU)
	if !ok {
		return
	}
	if why := checkGPU(n); why != "" {
		r.fail(v, why)
		return
	}
	q.GPU = int(n)
}

func readDisk(r *reader, v value, q *events.Request) {
	if !v.given() {
		return // DefaultDisk
	}
	n, ok := r.size(v, wantSize)
	if !ok {
		return
	}
	if why := checkDisk(n); why != "" {
		r.fail(v, why)
		return
	}
	q.DiskBytes = n
}

// readLimit reads the one request field without a default: a job that
// could run for ever would hold its compute for ever.
func readLimit(r *reader, v value, q *events.Request) {
	if !v.given() {
		r.fail(v, "required ("+wantLimit+")")
		return
	}
	if sec, ok := r.seconds(v, wantLimit, checkLimit); ok {
		q.LimitSeconds = sec
	}
}

// readOutputs reads output: each item is a path or glob, required, or the
// long form {path, required}.
func readOutputs(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	items, ok := r.sequence(v, "a list of paths or globs under /out")
	if !ok {
		return
	}
	if len(items) > MaxOutputs {
		r.fail(v, fmt.Sprintf("has %d entries, more than %d", len(items), MaxOutputs))
		return
	}
	first := make(map[string]int)
	for i, it := range items {
		o := outputEntry{decl: events.OutputDecl{Required: true}}
		o.pathAt = it
		if isMapping(it.node) {
			if !readObject(r, it, outputFields, &o, "a mapping with path and required") {
				continue
			}
		} else {
			s, ok := r.text(it, wantOutput+", or {path, required}")
			if !ok {
				continue
			}
			if why := checkOutputPath(s); why != "" {
				r.fail(it, why)
				continue
			}
			o.decl.Path, o.ok = s, true
		}
		if !o.ok {
			continue
		}
		if at, dup := first[o.decl.Path]; dup {
			r.fail(o.pathAt, fmt.Sprintf("%s is already declared by output[%d]", quote(o.decl.Path), at))
			continue
		}
		first[o.decl.Path] = i
		j.Spec.Output = append(j.Spec.Output, o.decl)
	}
}

func readOutputPath(r *reader, v value, o *outputEntry) {
	o.pathAt = v
	if !v.given() {
		r.fail(v, "required ("+wantOutput+")")
		return
	}
	s, ok := r.text(v, wantOutput)
	if !ok {
		return
	}
	if why := checkOutputPath(s); why != "" {
		r.fail(v, why)
		return
	}
	o.decl.Path, o.ok = s, true
}

func readRequired(r *reader, v value, o *outputEntry) {
	if !v.given() {
		return // required unless said otherwise
	}
	if b, ok := r.boolean(v, "true or false"); ok {
		o.decl.Required = b
	}
}

const wantPriority = "a whole number from -10 to 10 (higher is held first; default 0)"

func readPriority(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	n, ok := r.number(v, wantPriority)
	if !ok {
		return
	}
	if why := checkPriority(n); why != "" {
		r.fail(v, why)
		return
	}
	j.Spec.Priority = int(n)
}

func readAfter(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	items, ok := r.sequence(v, "a list of job ids that must succeed first")
	if !ok {
		return
	}
	if len(items) > MaxAfter {
		r.fail(v, fmt.Sprintf("has %d entries, more than %d", len(items), MaxAfter))
		return
	}
	seen := map[string]bool{}
	for _, it := range items {
		id, ok := r.text(it, "a job id")
		if !ok {
			continue
		}
		if why := checkFromJob(id); why != "" {
			r.fail(it, why)
			continue
		}
		if seen[id] {
			r.fail(it, quote(id)+" is listed twice")
			continue
		}
		seen[id] = true
		j.Spec.After = append(j.Spec.After, id)
	}
}

// readSweep reads sweep: {values: [...]} or {count: N}. The CLI submits one
// job per point; here it is only the list of values.
func readSweep(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	var sw sweepEntry
	if !readObject(r, v, sweepFields, &sw, "a mapping with values (a list) or count (a number)") {
		return
	}
	switch {
	case sw.valuesAt.given() && sw.countAt.given():
		r.fail(v, "give values or count, not both")
	case !sw.valuesAt.given() && !sw.countAt.given():
		r.fail(v, "needs values (a list of parameter values) or count (how many jobs)")
	default:
		j.Sweep = sw.values
	}
}

func readSweepValues(r *reader, v value, sw *sweepEntry) {
	sw.valuesAt = v
	if !v.given() {
		return
	}
	items, ok := r.sequence(v, "a list of parameter values")
	if !ok {
		return
	}
	if len(items) == 0 || len(items) > MaxSweep {
		r.fail(v, fmt.Sprintf("has %d values; a sweep has 1 to %d", len(items), MaxSweep))
		return
	}
	for _, it := range items {
		s, ok := r.text(it, "a value (a string or number)")
		if !ok {
			continue
		}
		if why := checkSweepValue(s); why != "" {
			r.fail(it, why)
			continue
		}
		sw.values = append(sw.values, s)
	}
}

func readSweepCount(r *reader, v value, sw *sweepEntry) {
	sw.countAt = v
	if !v.given() {
		return
	}
	n, ok := r.number(v, fmt.Sprintf("a whole number from 1 to %d", MaxSweep))
	if !ok {
		return
	}
	if n != float64(int(n)) || n < 1 || n > MaxSweep {
		r.fail(v, fmt.Sprintf("must be a whole number from 1 to %d, got %v", MaxSweep, n))
		return
	}
	for i := 0; i < int(n); i++ {
		sw.values = append(sw.values, strconv.Itoa(i))
	}
}

func readWaitForNode(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	if b, ok := r.boolean(v, "true or false"); ok {
		j.Spec.WaitForNode = b
	}
}
