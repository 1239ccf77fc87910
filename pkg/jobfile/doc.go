// Package jobfile reads the job file of DESIGN.md — a person's declaration
// of what to run, on what data, with what resources and limit, and what to
// return — and turns it into the normalized events.JobSpec that travels in
// JobRequested and JobSubmitted.
//
// # Two readers of one set of rules
//
// The package serves both ends of a submission:
//
//   - The CLI calls ParseFile. It gets a Job: the spec, with sizes in bytes
//     and durations in seconds and every default filled in, plus the local
//     paths of the data to upload (Job.Paths). It uploads them, fills in
//     each entry's Digest and Kind, and publishes the spec.
//   - SUBMIT calls Validate on whatever spec arrived on the bus. Anyone may
//     publish there, so Validate trusts nothing: it applies the same rules
//     as Parse to the normalized form, and insists that every data entry be
//     resolved (Digest and Kind, or FromJob).
//
// The rules live once, in small functions both use, so a file the CLI
// accepts is a spec SUBMIT accepts; a fuzz test holds them to it.
//
// # Positions
//
// Parse does not decode the YAML into structs, which would lose where each
// value came from. It parses to goccy/go-yaml's syntax tree and walks it
// with one small table of fields per mapping, so that every problem carries
// the file, line and column, and the path of the field:
//
//	job.yaml:4:5: work.comand: unknown field (expected one of: command, env, image)
//	job.yaml:7:3: request.limit: required (a duration such as 10m)
//
// Every problem found is reported, sorted by position, one per line, in an
// *Error; a person fixes a file in one pass rather than one error at a time.
//
// # What the format accepts
//
// JSON is YAML, so both are read by the same parser. Unknown fields,
// duplicate keys, an empty file and more than one YAML document are errors.
// Anchors, aliases, merge keys and tags are refused: a job file is plain
// data, and a value that stands for another would make positions lie. Where
// a string is expected, other scalars are taken as written (1.0 stays "1.0",
// yes stays "yes"); where a number is expected, a quoted number is an error.
// A field given as null ("memory:" with nothing after it) counts as left out.
//
// work.command is a list of strings, run as it is, or one string, which is
// run as ["/bin/sh", "-c", string]. Sizes and durations follow ParseSize and
// ParseDuration; request defaults to DefaultCPU, DefaultMemory, DefaultGPU
// and DefaultDisk; request.limit has no default. Each output is a path or a
// glob (path.Match syntax) relative to /out, required unless written as
// {path: p, required: false}. Local data paths are resolved against the job
// file's folder; ~ is not expanded. retention (MinRetention to MaxRetention)
// is how long the job's data and output are kept after it ends; left out,
// the spec carries nothing and events.DefaultRetention applies.
//
// # Bounds
//
// A job file is at most MaxFileBytes, MaxTokens YAML tokens and MaxDepth
// levels deep. These are checked before the YAML parser runs, because its
// cost grows faster than linearly with nesting and with the size of a block
// mapping, and a megabyte of either takes it minutes. The Max and Min
// constants bound every value of a spec; they catch typos and hostile specs
// and are not the capacity of any pool.
package jobfile
