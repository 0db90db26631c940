#!lua flags=allow-oom
-- reap: ARGV now_ms. Anyone may run it. Hands back the batches of every
-- consumer whose lease ran out (poison batches to the dead-letter list)
-- and returns to the waiting list every task whose lease ran out.
-- Returns {batches handed back, tasks reaped}.
--! include lib
if redis.call('EXISTS', meta) == 0 then
  return redis.error_reply('NOQUEUE no such queue')
end
local now = tonumber(ARGV[1])
local lease = tonumber(redis.call('HGET', meta, 'lease_ms') or '10000')
local maxd = tonumber(redis.call('HGET', meta, 'max_deliveries') or '0')
local seen = redis.call('HGETALL', pre .. 'consumers')
local n = 0
for i = 1, #seen, 2 do
  if tonumber(seen[i + 1]) + lease < now then
    n = n + give_back(seen[i], maxd, now, {})
    drop_consumer(seen[i])
  end
end
local t = 0
if redis.call('EXISTS', job) == 1 then t = reap_tasks(now) end
final_if_drained()
return {n, t}
