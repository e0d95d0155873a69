// Package cache is a node agent's artifact cache: it turns a replica spec
// into a directory holding every file of the replica's version, each one
// checked against its sha256 before a runtime may open it.
//
// The agent names a version by the digest of its manifest; the cache fetches
// the manifest and then each missing file by digest from the control plane
// (GET /internal/artifacts/{sha256}), streaming into a partial file that
// survives an agent restart and is resumed with a Range request. A file is
// hashed before it becomes visible: a mismatch deletes it and fetches it
// once more, and a second mismatch fails the preparation with the reason.
// Files are kept once per digest (blobs/sha256/…), read-only; each replica
// gets its own directory of hard links to them (replicas/<id>), beside the
// runtime's settings file. A cached file is trusted again without hashing
// only while its inode, size and change time are those recorded when it was
// verified; anything that writes to it or changes its mode moves the change
// time, and it is hashed again.
//
// The cache is bounded (Config.LimitBytes): above 80 % of the limit it
// evicts the least recently used versions until it is under 70 %, never a
// version a replica holds (Prepare pins it until Release) and never a file
// such a version, or any version kept, lists.
//
// It must not import the database or know teams: it only ever sees specs
// and digests, and it trusts nothing it downloads before hashing it.
package cache
