#!lua flags=allow-oom
-- beat: ARGV kind ('consumer' or 'producer'), id, token, fresh, rank (''
-- for none), then field/value pairs of the sender's counters. A
-- consumer's renews its lease (lib.lua: enter; token and fresh as there),
-- publishes its counters once it holds the lease, and returns {1, job
-- state ('none', 'running', 'finished'), producers seen in the last 5 s},
-- what a waiting consumer tells its user. A producer's (token: its
-- process's, rank '') records that it is alive, publishes its counters and
-- returns 1; with fresh 'left' (its last, at close) it then leaves the
-- registry, its counters folded into pstats_gone. A producer's beat also
-- unregisters the producers silent for longer than the queue's lease.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local id = ARGV[2]
if ARGV[1] == 'producer' then
  local st = pre .. 'pstats:' .. id
  -- Counters gone with a reap while this process was frozen come back.
  if ARGV[3] ~= '' and redis.call('EXISTS', st) == 0 then unfold_stats('p', id, ARGV[3]) end
  if #ARGV >= 7 then redis.call('HSET', st, unpack(ARGV, 6)) end
  if ARGV[4] == 'left' then
    redis.call('HDEL', pre .. 'producers', id)
    redis.call('HDEL', pre .. 'ptoken', id)
    fold_stats('p', id, nil)
    return 1
  end
  redis.call('HSET', pre .. 'producers', id, now)
  if ARGV[3] ~= '' then redis.call('HSET', pre .. 'ptoken', id, ARGV[3]) end
  reap_producers(now, lease_ms())
  return 1
end
local err = enter(id, ARGV[3], ARGV[4], ARGV[5], now)
if err then return err end
if #ARGV >= 7 then redis.call('HSET', pre .. 'cstats:' .. id, unpack(ARGV, 6)) end
local alive = 0
local ps = redis.call('HGETALL', pre .. 'producers')
for i = 2, #ps, 2 do
  if now - tonumber(ps[i]) < 5000 then alive = alive + 1 end
end
return {1, redis.call('HGET', jrun, 'state') or 'none', alive}
