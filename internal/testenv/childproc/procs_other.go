//go:build unix && !linux

package childproc

import "syscall"

// SysProcAttr puts a child in a process group of its own, so a Ctrl-C in
// the terminal reaches only the parent, which stops the child in order.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// List needs /proc; elsewhere only the children's PIDs can be checked.
func List() ([]Info, error) { return nil, ErrNoProcfs }

// PeakRSS needs /proc.
func PeakRSS(int) (int64, error) { return 0, ErrNoProcfs }

// FileRSS needs /proc.
func FileRSS(int) (int64, error) { return 0, ErrNoProcfs }
