package output

import "github.com/e31net/e31/services/output/retention"

// Retention is the retention the service runs (nil without a store).
func (s *Service) Retention() *retention.Service { return s.retention }
