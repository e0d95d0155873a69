package db

// Interpreting exposes the DBTX wrapper to the external tests, which reach
// it otherwise only through generated queries (and no generated query makes
// a unique violation surface from Rows.Err).
func Interpreting(d DBTX) DBTX { return interpreting{d} }
