#!lua flags=allow-oom
-- dead: ARGV cid, id, reason. A consumer found the batch invalid: it
-- leaves the consumer's pending list for the dead-letter list.
--! include lib
local nq = noqueue() if nq then return nq end
redis.call('LREM', pre .. 'pending:' .. ARGV[1], 1, ARGV[2])
dead_letter(ARGV[2], ARGV[3], now_ms())
final_if_drained()
return 1
