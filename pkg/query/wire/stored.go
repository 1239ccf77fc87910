package wire

import "time"

// OutputStoredSubject is where user asks OUTPUT what jobs keep in the
// data store, and until when (a StoredRequest, answered with a
// StoredReply, from OUTPUT's projection of the log). OUTPUT answers about
// user's own jobs only, unless user is the auditor or the operator.
func OutputStoredSubject(user string) string { return apiPrefix + user + ".output.stored" }

// OutputStoredService is what OUTPUT serves: every user's stored subject.
const OutputStoredService = apiPrefix + "*.output.stored"

// StoredRequest selects jobs; zero fields select every job that still
// keeps something.
type StoredRequest struct {
	Submitter string `json:"submitter,omitempty"`
	Job       string `json:"job,omitempty"`
	// Deleted includes jobs whose data and output are both deleted.
	Deleted bool `json:"deleted,omitempty"`
	// After pages: jobs whose id sorts after this one.
	After string `json:"after,omitempty"`
	// MinSeq makes OUTPUT answer only once it has read the log that far.
	MinSeq uint64 `json:"min_seq,omitempty"`
	// Fresh makes OUTPUT answer as of everything logged before the
	// request: how a submitter, who may not read the log's last sequence,
	// asks for an answer as of now.
	Fresh bool `json:"fresh,omitempty"`
}

// StoredReply is one page of jobs, sorted by id.
type StoredReply struct {
	Jobs    []Stored `json:"jobs"`
	More    bool     `json:"more"`
	Applied uint64   `json:"applied"`
	Error   string   `json:"error,omitempty"`
	// Code says what Error is, for a program: CodeBusy.
	Code string `json:"code,omitempty"`
}

// Stored is what one job keeps in the store.
type Stored struct {
	Job       string `json:"job"`
	Name      string `json:"name,omitempty"`
	Submitter string `json:"submitter"`
	Over      bool   `json:"over"`
	// RetentionSeconds is how long data and output live after the end.
	RetentionSeconds float64 `json:"retention_seconds"`
	// Expires is when they are deleted, once the job is over.
	Expires *time.Time `json:"expires,omitempty"`
	Data    StoredPart `json:"data"`
	Output  StoredPart `json:"output"`
}

// StoredPart is a job's staged data, or its output.
type StoredPart struct {
	Files     int        `json:"files"`
	Bytes     int64      `json:"bytes"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}
