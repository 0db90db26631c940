#!lua flags=allow-oom
-- take: ARGV cid, n, now_ms, epoch, rank ('' in a free queue).
-- Moves up to n ids of the epoch's list into the consumer's pending list.
-- Returns {id1, deliveries1, id2, ...} (deliveries: this one included);
-- an end marker 'eof:<epoch>' comes last with deliveries 0 and stays in
-- the list for the other consumers.
--! include lib
if redis.call('EXISTS', meta) == 0 then
  return redis.error_reply('NOQUEUE no such queue')
end
redis.call('HSET', pre .. 'consumers', ARGV[1], ARGV[3])
if ARGV[5] ~= '' then redis.call('HSET', pre .. 'crank', ARGV[1], ARGV[5]) end
local list = ready_key(ARGV[4], ARGV[5])
local ids = redis.call('RPOP', list, ARGV[2])
if not ids then return {} end
local out, got, marker = {}, {}, nil
for i, id in ipairs(ids) do
  if string.sub(id, 1, 4) == 'eof:' then
    -- The marker (and anything behind it) goes back where it was.
    local back = {}
    for j = #ids, i, -1 do back[#back + 1] = ids[j] end
    redis.call('RPUSH', list, unpack(back))
    marker = id
    break
  end
  got[i] = id
end
if #got > 0 then
  redis.call('LPUSH', pre .. 'pending:' .. ARGV[1], unpack(got))
  -- dlv counts the deliveries that ended without an acknowledgement.
  local d = redis.call('HMGET', pre .. 'dlv', unpack(got))
  for i, id in ipairs(got) do
    out[#out + 1], out[#out + 2] = id, tonumber(d[i] or '0') + 1
  end
end
if marker then out[#out + 1], out[#out + 2] = marker, 0 end
return out
