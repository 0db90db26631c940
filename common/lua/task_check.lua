#!lua flags=allow-oom
-- task_check: ARGV producer id, 'epoch:shard', from, to (to - from <=
-- 1024), and on the last chunk the run_id the first chunk returned ('' when
-- the last is the first).
-- Checks that every batch seq in [from, to) of the task is in the
-- queue: held (dlv), acknowledged (its bit) or dead-lettered. A producer
-- whose connection was lost while it held the task, or whose task_done
-- answered 2 (Redis restarted), runs it before task_done, chunk by chunk:
-- Redis may have come back without its last writes, pushes it had
-- answered among them. Returns {1, run_id} when every one is there (run_id:
-- the server's, '' when the ACL refuses INFO); the last chunk, when the
-- server is still the one of the first, records it in trun, so that
-- task_done takes the task as checked. {0, seq} when seq is the first
-- missing: the task is then handed back, its resume point set to seq (the
-- next claim pushes from there; those still stored are dropped as
-- duplicates); 0 when the task is no longer this producer's.
--! include lib
local nq = noqueue() if nq then return nq end
local t = ARGV[2]
if redis.call('HGET', pre .. 'towner', t) ~= ARGV[1] then return 0 end
local from, to = tonumber(ARGV[3]), tonumber(ARGV[4])
if not from or not to or from < 0 or to < from or to - from > 1024 or to > 16777216 then
  return redis.error_reply('INVALID task_check range ' .. ARGV[3] .. ' ' .. ARGV[4])
end
if to > from then
  local ids = {}
  for s = from, to - 1 do ids[#ids + 1] = t .. ':' .. s end
  local held = redis.call('HMGET', pre .. 'dlv', unpack(ids))
  local bm = pre .. 'acked:' .. t
  for k, id in ipairs(ids) do
    if not held[k] and redis.call('GETBIT', bm, from + k - 1) == 0 and
       redis.call('HEXISTS', pre .. 'deadinfo', id) == 0 then
      local seq = from + k - 1
      redis.call('HSET', pre .. 'tresume', t, seq)
      task_failed(t, 'Redis lost pushes of it (batch ' .. seq .. ' on): redone from there', false)
      return {0, seq}
    end
  end
end
local rid = run_id() or ''
if rid ~= '' and (ARGV[5] == '' or ARGV[5] == rid) then redis.call('HSET', pre .. 'trun', t, rid) end
return {1, rid}
