#!lua flags=allow-oom
-- take: ARGV cid, token, fresh, n, epoch, rank ('' in a free queue).
-- Renews the consumer's lease (lib.lua: enter) and moves up to n batch ids
-- of the epoch's list into the consumer's pending list. Returns {id1,
-- deliveries1, id2, ...} (deliveries: this one included); the end marker
-- 'eof:<epoch>' comes last with deliveries 0 and stays in the list for
-- the other consumers. What is not a batch id, not a batch the queue
-- holds, or an end marker that is not the epoch's posted end goes to the
-- dead letters as it is. Batches left in the lists of earlier epochs
-- (Redis lost the end of an epoch the consumer had passed, with its last
-- second of writes) are taken first: they are late, not lost.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local cid, want, ep, rank = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local err = enter(cid, ARGV[2], ARGV[3], rank, now)
if err then return err end
local got, dlvs, dl, marker = {}, {}, {}, nil
-- Moves up to want - #got ids of epoch e's list to got (their dlv counts
-- to dlvs); returns true at e's end marker (which stays in the list). An
-- id dlv holds is a batch id: only push (which checks the grammar) and
-- the scripts that hand batches back write dlv.
local function take_from(e)
  local list = ready_key(e, rank)
  local ids = redis.call('RPOP', list, want - #got)
  if not ids then return false end
  local eof = 'eof:' .. e
  local d = redis.call('HMGET', pre .. 'dlv', unpack(ids))
  for i, id in ipairs(ids) do
    if id == eof and true_marker(id, e) then
      -- The marker (and anything behind it) goes back where it was.
      local back = {}
      for j = #ids, i, -1 do back[#back + 1] = ids[j] end
      redis.call('RPUSH', list, unpack(back))
      return true
    end
    if d[i] then
      local k = #got + 1
      got[k], dlvs[k] = id, d[i]
    elseif marker_epoch(id) then
      dl[#dl + 1] = {id, 'an end marker in the list of epoch ' .. e .. ' that is not its posted end'}
    elseif valid_id(id) then
      dl[#dl + 1] = {id, 'not a batch the queue holds'}
    else
      dl[#dl + 1] = {id, 'not a batch id'}
    end
  end
  return false
end
local open = tonumber(redis.call('HGET', job, 'epoch_open') or ep)
for e = math.max(open, ep - 16), ep - 1 do
  if #got >= want then break end
  take_from(e)
end
if #got < want and take_from(ep) then marker = 'eof:' .. ep end
for _, d in ipairs(dl) do dead_letter(d[1], d[2], now) end
local out = {}
if #got > 0 then
  redis.call('LPUSH', pre .. 'pending:' .. cid, unpack(got))
  -- dlv counts the deliveries that ended without an acknowledgement.
  for i, id in ipairs(got) do
    out[#out + 1], out[#out + 2] = id, tonumber(dlvs[i]) + 1
  end
end
if marker then out[#out + 1], out[#out + 2] = marker, 0 end
return out
