package client

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/limits"
)

// LimitEdit reads the limits an operator gives (`e31 setup --max-data
// --max-queued --max-rate --allow-image`; "" is not given) into an edit of
// the stored policies, for SetLimits. Its errors wrap ErrInvalid and start
// with the limit's name (max-data: …).
func LimitEdit(maxData, maxQueued, maxRate string, images []string) (limits.Edit, error) {
	e := limits.Edit{Images: images}
	if maxData != "" {
		n, err := limits.ParseLimit(maxData, func(s string) (int64, error) { return jobfile.ParseSize(s) })
		if err != nil {
			return e, kind(ErrInvalid, fmt.Errorf("max-data: %w", err))
		}
		e.MaxDataBytes = &n
	}
	for _, c := range []struct {
		name, value string
		to          **int
	}{{"max-queued", maxQueued, &e.MaxQueued}, {"max-rate", maxRate, &e.MaxRate}} {
		if c.value == "" {
			continue
		}
		n, err := limits.ParseLimit(c.value, func(s string) (int64, error) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("%q is not a whole number from 1 (or unlimited)", s)
			}
			return int64(n), nil
		})
		if err != nil {
			return e, kind(ErrInvalid, fmt.Errorf("%s: %w", c.name, err))
		}
		v := int(n)
		*c.to = &v
	}
	for _, im := range images {
		if strings.TrimSpace(im) == "" || strings.ContainsAny(im, " \t\n") {
			return e, kind(ErrInvalid, fmt.Errorf("allow-image %q is not an image name", im))
		}
	}
	return e, nil
}
