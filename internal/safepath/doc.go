// Package safepath owns the paths below a root directory (the launcher's log directory): each is created, opened
// and removed without following a symlink in any component below the root and without leaving it, and without
// blocking on a FIFO or socket planted where a file goes (the workers can write below the root). The root itself is
// the operator's choice and may be reached through symlinks.
//
// OpenBeneath resolves with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS); where the kernel
// lacks openat2 (ENOSYS: Linux before 5.6, or a seccomp filter) it walks the path one component at a time, each
// opened with O_NOFOLLOW|O_DIRECTORY relative to the previous one. MkdirAllBeneath always walks (mkdirat per
// missing component). Every step is relative to a directory already opened, so a symlink swapped in between two
// steps is refused too, not followed.
package safepath
