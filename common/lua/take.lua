#!lua flags=allow-oom
-- take: ARGV cid, n, now_ms, epoch, rank ('' in a free queue).
-- Moves up to n ids of the epoch's list into the consumer's pending list.
-- Returns {id1, deliveries1, id2, ...}; an end marker 'eof:<epoch>' comes
-- last with deliveries 0 and stays in the list for the other consumers.
--! include lib
if redis.call('EXISTS', meta) == 0 then
  return redis.error_reply('NOQUEUE no such queue')
end
redis.call('HSET', pre .. 'consumers', ARGV[1], ARGV[3])
if ARGV[5] ~= '' then redis.call('HSET', pre .. 'crank', ARGV[1], ARGV[5]) end
local list = ready_key(ARGV[4], ARGV[5])
local pending = pre .. 'pending:' .. ARGV[1]
local out = {}
for i = 1, tonumber(ARGV[2]) do
  local id = redis.call('LINDEX', list, -1)
  if not id then break end
  if string.sub(id, 1, 4) == 'eof:' then
    out[#out + 1] = id
    out[#out + 1] = 0
    break
  end
  redis.call('LMOVE', list, pending, 'RIGHT', 'LEFT')
  out[#out + 1] = id
  out[#out + 1] = redis.call('HINCRBY', pre .. 'dlv', id, 1)
end
return out
