-- A row NATS refuses for good (a payload over the server's limit, a message
-- its stream will never take) is settled with the reason instead of
-- blocking every row after it; refused rows are kept for operators.
ALTER TABLE outbox ADD COLUMN error text;
