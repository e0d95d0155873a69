ALTER TABLE request_stats ADD COLUMN pinned UInt8 DEFAULT 0
