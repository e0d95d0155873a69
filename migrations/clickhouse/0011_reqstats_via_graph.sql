ALTER TABLE request_stats ADD COLUMN via_graph String DEFAULT '', ADD COLUMN via_graph_version String DEFAULT ''
