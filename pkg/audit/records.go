package audit

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/e31net/e31/pkg/hold"
)

// ParseRecords reads a copy of the ledger's records to compare with
// (Report.Compare): a list ('e31 ledger --json'), which is all of them, or
// one record ('e31 ledger ID --json'). It says which it was.
func ParseRecords(b []byte) (recs []*hold.HoldRecord, all bool, err error) {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		var r hold.HoldRecord
		if err := json.Unmarshal(t, &r); err != nil {
			return nil, false, fmt.Errorf("not a hold record: %w", err)
		}
		return []*hold.HoldRecord{&r}, false, nil
	}
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, false, fmt.Errorf("not a list of hold records: %w", err)
	}
	return recs, true, nil
}
