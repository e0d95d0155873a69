ALTER TABLE request_stats ADD COLUMN caller_team String DEFAULT ''
