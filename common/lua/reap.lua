#!lua flags=allow-oom
-- reap: no ARGV. Anyone may run it. Hands back the batches of every
-- consumer whose lease ran out on the server's clock (poison batches to
-- the dead-letter list) and unregisters it, its counters folded into
-- cstats_gone (lib.lua: drop_consumer), and returns to the waiting lists every task whose
-- lease ran out, and forgets the batches a producer dropped at the end of
-- a coordinated epoch (lib.lua: epoch_end). Returns {batches handed back,
-- tasks reaped}.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local lease = lease_ms()
local seen = redis.call('HGETALL', pre .. 'consumers')
local n = 0
for i = 1, #seen, 2 do
  if tonumber(seen[i + 1]) + lease < now then
    n = n + reap_consumer(seen[i], now)
  end
end
local t = 0
if redis.call('EXISTS', job) == 1 then t = reap_tasks(now) end
forget_dropped(1000)
final_if_drained()
return {n, t}
