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
if redis.call('EXISTS', pre .. 'recover', pre .. 'recover_pause') > 0 then
  -- Redis restarted: consumers may have yet to restore (restore.lua).
  return redis.error_reply('RECOVERING Redis restarted; consumers yet to restore: ' ..
                           redis.call('SCARD', pre .. 'recover'))
end
local got, dlvs, dl, marker = {}, {}, {}, nil
-- Moves up to want - #got ids of epoch e's list to got (their dlv counts
-- to dlvs). At e's end marker it stops and returns true (the marker and
-- what lies behind it stay in the list), unless late: then the marker
-- alone goes back and the ids behind it are taken too. An id dlv holds is
-- a batch id: only push (which checks the grammar) and the scripts that
-- hand batches back write dlv.
local function take_from(e, late)
  local list = ready_key(e, rank)
  local ids = redis.call('RPOP', list, want - #got)
  if not ids then return false end
  local eof = 'eof:' .. e
  local d = redis.call('HMGET', pre .. 'dlv', unpack(ids))
  local seen_eof = false
  for i, id in ipairs(ids) do
    if id == eof and not seen_eof and true_marker(id, e) then
      if not late then
        -- The marker (and anything behind it) goes back where it was.
        local back = {}
        for j = #ids, i, -1 do back[#back + 1] = ids[j] end
        redis.call('RPUSH', list, unpack(back))
        return true
      end
      seen_eof = true
    elseif d[i] then
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
  if seen_eof then redis.call('RPUSH', list, eof) end
  return false
end
-- Batches in the lists of the 16 epochs before this one are late, not
-- lost: Redis lost the end of an epoch with its last second of writes, a
-- batch was pushed again into that epoch's list and its end posted anew
-- behind it, after this consumer had passed it. Such a list holds more
-- than its end marker (normally it holds just that, or nothing).
for e = math.max(0, ep - 16), ep - 1 do
  if #got >= want then break end
  local list = ready_key(e, rank)
  local n = redis.call('LLEN', list)
  if n > 1 or (n == 1 and redis.call('LINDEX', list, 0) ~= 'eof:' .. e) then
    take_from(e, true)
  end
end
if #got < want and take_from(ep, false) then marker = 'eof:' .. ep end
for _, d in ipairs(dl) do dead_letter(d[1], d[2], now) end
local out = {}
if #got > 0 then
  redis.call('LPUSH', pre .. 'pending:' .. cid, unpack(got))
  -- dlv counts the deliveries that ended without an acknowledgement
  -- (mostly none: '0', which needs no tonumber).
  for i, id in ipairs(got) do
    local d = dlvs[i]
    out[#out + 1], out[#out + 2] = id, d == '0' and 1 or tonumber(d) + 1
  end
end
if marker then out[#out + 1], out[#out + 2] = marker, 0 end
return out
