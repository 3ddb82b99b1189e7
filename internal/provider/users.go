package provider

import "context"

// UsersUpdater is implemented by providers that can give a running
// instance another clientAuth file in place, without replacing it: the
// kubernetes provider rewrites the Secret its Pod mounts, the kubelet
// syncs the file into the Pod and Squid's basic_ncsa_auth reads it again
// when its modification time changes. A provider without it gets a new
// instance for new users (the users are in the shape hash then: make
// before break).
//
// Only the file's content changes this way: whether a Proxy has clientAuth
// at all changes the proxy's configuration, which is in the shape of every
// provider.
type UsersUpdater interface {
	// UpdateUsers makes instance id admit exactly the users of users (an
	// htpasswd file with bcrypt entries, never empty). It is idempotent
	// and cheap when the instance has them already (a read), so the
	// reconciler calls it on every pass of a running instance. It returns
	// once the backend holds the new file; the proxy reads it a little
	// later (docs/operations.md, "Rotating users"). NotFound when the
	// instance is gone.
	UpdateUsers(ctx context.Context, id string, users Sensitive) error
}

// OpUpdateUsers is UsersUpdater's call, as used in errors and log lines.
const OpUpdateUsers = "update_users"
