package v1alpha1

// RecordedProviderIDs lists, without empties, every instance ID the status
// records: the instances this Proxy accounts for. It is the one answer to
// "what does a Proxy record": the garbage collector never deletes an
// instance whose ID any Proxy's status lists here, whatever the instance's
// UID mark says, so a status field that records an instance belongs here.
func (s *ProxyStatus) RecordedProviderIDs() []string {
	var ids []string
	for _, id := range append([]string{s.ProviderID, s.RetiringProviderID}, s.SupersededProviderIDs...) {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}
