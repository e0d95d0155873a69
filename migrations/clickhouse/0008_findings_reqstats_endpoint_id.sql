ALTER TABLE request_stats ADD COLUMN endpoint_id Int64 DEFAULT 0
