package rent

// Expiring is how many lapsed nodes the instance still has to record.
func (s *Service) Expiring() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.expiring)
}
