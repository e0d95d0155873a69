// Package errdefs holds the failures every layer branches on: the sentinels a
// domain package returns, the database layer produces from driver errors and
// the HTTP layer maps to status codes. Keeping them here, with no imports,
// lets handlers tell "not found" from "conflict" without importing db, and
// lets db produce them without importing anything above it.
//
// It must stay a leaf: sentinel values only, no behaviour, no imports of
// other modelplane packages.
package errdefs
