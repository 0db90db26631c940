#!lua flags=allow-oom
-- beat: ARGV kind ('consumer' or 'producer'), id, token, fresh, rank (''
-- for none), then field/value pairs of the sender's counters. A
-- consumer's renews its lease (lib.lua: enter; token and fresh as there)
-- and returns {1, job state ('none', 'running', 'finished'), producers
-- seen in the last 5 s}, what a waiting consumer tells its user. A
-- producer's (token, fresh and rank '') records that it is alive and
-- returns 1. Both publish the counters.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local id = ARGV[2]
if #ARGV >= 7 then
  local stats = (ARGV[1] == 'producer' and 'pstats:' or 'cstats:') .. id
  redis.call('HSET', pre .. stats, unpack(ARGV, 6))
end
if ARGV[1] == 'producer' then
  redis.call('HSET', pre .. 'producers', id, now)
  return 1
end
local err = enter(id, ARGV[3], ARGV[4], ARGV[5], now)
if err then return err end
local alive = 0
local ps = redis.call('HGETALL', pre .. 'producers')
for i = 2, #ps, 2 do
  if now - tonumber(ps[i]) < 5000 then alive = alive + 1 end
end
return {1, redis.call('HGET', jrun, 'state') or 'none', alive}
