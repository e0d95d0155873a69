package migrations

// ClickHouseUpTo lets tests build a database as an earlier release left it.
var ClickHouseUpTo = clickHouseUpTo
