// Package volume holds Cube's persistent volumes on one host: each is a
// sparse disk image formatted ext4 and loop-mounted under the data
// directory, so its size cap is the filesystem's own (a full volume is
// ENOSPC inside a sandbox, never a full host disk), and a sandbox binds
// the mounted directory through gVisor's gofer. It also holds the rules a
// volume's name and a mount path must follow, and the file operations of
// the volume content API, which never leave a volume's root.
package volume
