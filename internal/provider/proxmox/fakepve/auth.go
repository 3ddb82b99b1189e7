package fakepve

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Authentication as pve-manager HTTPServer.pm auth_handler does it for API
// tokens: the Authorization header's "PVEAPIToken=<user@realm!id>=<secret>"
// (extract_auth_value also takes "PVEAPIToken <value>"; the value is URI
// unescaped), no header at all "No ticket", anything that does not verify
// "Authentication failed!". Tickets (cookies) are not modelled: any ticket
// fails. PVE delays every 401 by 3 seconds; the fake answers at once.

var (
	reAuthValue = regexp.MustCompile(`(?:^|\s)PVEAPIToken(?:=| )([^;]*)`)
	reTicket    = regexp.MustCompile(`(?:^|\s)PVEAuthCookie(?:=| )([^;]*)`)
	reTokenID   = regexp.MustCompile(`^(([^\s:/@]+)@([A-Za-z][A-Za-z0-9\.\-_]+))!([A-Za-z][A-Za-z0-9\.\-_]+)$`)
)

func (s *Server) authenticate(r *http.Request) (string, *Error) {
	h := r.Header.Get("Authorization")
	if reTicket.MatchString(r.Header.Get("Cookie")) || reTicket.MatchString(h) {
		return "", AuthFailed()
	}
	m := reAuthValue.FindStringSubmatch(h)
	if m == nil || m[1] == "" {
		return "", NoTicket()
	}
	val, err := url.PathUnescape(m[1])
	if err != nil {
		val = m[1]
	}
	i := strings.LastIndex(val, "=")
	if i < 0 {
		return "", AuthFailed()
	}
	id, secret := val[:i], val[i+1:]
	if !reTokenID.MatchString(id) {
		return "", AuthFailed()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[id]
	if t == nil || subtle.ConstantTimeCompare([]byte(t.Secret), []byte(secret)) != 1 {
		return id, AuthFailed()
	}
	return id, nil
}

// privs is the token's privilege set on path: the entry on the path itself,
// else the nearest ancestor's propagating entry.
func (s *Server) privs(authID, path string) map[string]bool {
	t := s.tokens[authID]
	if t == nil {
		return nil
	}
	for p := path; ; p = parentACLPath(p) {
		for _, e := range t.ACL {
			if e.Path == p && (p == path || !e.NoPropagate) {
				set := map[string]bool{}
				for _, pr := range e.Privs {
					set[pr] = true
				}
				return set
			}
		}
		if p == "/" {
			return nil
		}
	}
}

func parentACLPath(p string) string {
	i := strings.LastIndex(strings.TrimRight(p, "/"), "/")
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// check is RPCEnvironment check (all privileges, first missing named) or
// check_any (any of them, all named). Callers hold s.mu.
func (s *Server) check(authID, path string, any bool, privs ...string) *Error {
	have := s.privs(authID, path)
	if any {
		for _, p := range privs {
			if have[p] {
				return nil
			}
		}
		return PermissionDenied(path, privs...)
	}
	for _, p := range privs {
		if !have[p] {
			return PermissionDenied(path, p)
		}
	}
	return nil
}

// perm builds a route's ['perm', path, [privs]] check; {x} in path is the
// call's parameter x.
func perm(path string, any bool, privs ...string) func(c *call) *Error {
	return func(c *call) *Error {
		p := path
		for k, v := range c.p {
			p = strings.ReplaceAll(p, "{"+k+"}", v)
		}
		return c.s.check(c.req.authID, p, any, privs...)
	}
}

// uploadAuthCheck is auth_handler's Datastore.AllocateTemplate check for
// uploads; its refusal is a bare 403 (a PVE::Exception out of the auth
// handler gets no body).
func (s *Server) uploadAuthCheck(req *request) *Error {
	p := strings.Split(strings.Trim(req.rel, "/"), "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.check(req.authID, "/storage/"+p[3], false, "Datastore.AllocateTemplate")
	if e != nil {
		e.Bare = true
	}
	return e
}

// SetTokenACL replaces the ACL of token id (adding the token with a random
// secret when it is new) and returns its secret.
func (s *Server) SetTokenACL(id string, acl ...ACE) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[id]
	if t == nil {
		t = &Token{ID: id, Secret: randomUUID()}
		s.tokens[id] = t
	}
	t.ACL = append([]ACE(nil), acl...)
	return t.Secret
}

// Revoke drops privileges from the entry for path of token id (creating the
// entry from what the token has there, so revoking on /vms/101 leaves the
// rest of the tree as it was).
func (s *Server) Revoke(id, path string, privs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[id]
	if t == nil {
		return
	}
	have := s.privs(id, path)
	drop := map[string]bool{}
	for _, p := range privs {
		drop[p] = true
	}
	var keep []string
	for _, p := range Administrator {
		if have[p] && !drop[p] {
			keep = append(keep, p)
		}
	}
	for i, e := range t.ACL {
		if e.Path == path {
			t.ACL[i].Privs = keep
			return
		}
	}
	t.ACL = append(t.ACL, ACE{Path: path, Privs: keep})
}

func splitTokenID(id string) (user, token string) {
	m := reTokenID.FindStringSubmatch(id)
	if m == nil {
		return id, ""
	}
	return m[1], m[4]
}
