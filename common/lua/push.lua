#!lua
-- push: ARGV epoch, task, then the seq of each batch of a group (batch id
-- "epoch:task:seq"). It runs inside the MULTI that stored each frame as
-- sluice:{Q}:in:<id> just before, so no frame passes through Lua. A batch
-- taken becomes b:<id>; the in: key of any other is deleted, so none is
-- left whatever the outcome. Returns one result per batch: 1 stored, 2
-- duplicate (already queued or acknowledged), 0 full (and so is every
-- later batch of the group), or an error: TOOBIG (a frame above the
-- queue's frame limit or its byte budget), INVALID (no frame, or a seq
-- that is not canonical decimal up to 16777215). An epoch or task that is
-- not canonical decimal (epoch < 2^32, task < 2^64) refuses the whole
-- call with INVALID: every id the queue holds obeys the grammar of
-- valid_id (lib.lua), which take and claim rely on. A batch of an epoch
-- whose end is posted already goes to the first epoch still open (it is
-- late; see requeue_list in lib.lua).
local pre = string.match(KEYS[1], '^sluice:{[^}]*}:')   -- as in lib.lua
local meta = pre .. 'meta'
redis.call('EXISTS', meta, pre .. 'guard')   -- migration guard (lib.lua)
local e, t = ARGV[1], ARGV[2]
local n = #ARGV - 2
-- Canonical decimal of at most maxlen digits (no sign, no leading zero).
local function decimal(s, maxlen)
  return #s <= maxlen and (s == '0' or string.find(s, '^[1-9]%d*$') ~= nil)
end
-- (Up to 7 digits is below 16777215 already: no tonumber for most seqs.)
local function valid_seq(s)
  return decimal(s, 8) and (#s < 8 or tonumber(s) <= 16777215)
end
-- The room rule: a copy of has_room in lib.lua (push runs without lib, so
-- that a client can take this script from docs/PROTOCOL.md as it is).
local function has_room(count, used, size, maxn, maxb, ahead)
  if ahead then
    maxn = math.max(1, math.floor(maxn * 3 / 4))
    maxb = math.floor(maxb * 3 / 4)
  end
  return count + 1 <= maxn and used + size <= maxb
end
local ids, tmp, get, ok = {}, {}, {}, {}
local et = e .. ':' .. t .. ':'
local inp = pre .. 'in:' .. et
for k = 1, n do
  local q = ARGV[k + 2]
  ids[k], tmp[k], ok[k] = et .. q, inp .. q, valid_seq(q)
  -- (A seq out of range reads bit 0: the batch is refused below.)
  get[3 * k - 2], get[3 * k - 1], get[3 * k] = 'GET', 'u1', ok[k] and q or '0'
end
if not (decimal(e, 10) and tonumber(e) <= 4294967295 and decimal(t, 20) and
        (#t < 20 or t <= '18446744073709551615')) then
  if n > 0 then redis.call('DEL', unpack(tmp)) end
  local function shown(s) return (string.gsub(string.sub(s, 1, 24), '[^%w]', '?')) end
  return redis.error_reply('INVALID epoch ' .. shown(e) .. ', task ' .. shown(t) ..
                           ': not canonical decimal (epoch < 2^32, task < 2^64)')
end
local m = redis.call('HMGET', meta, 'max_batches', 'max_bytes', 'ranks', 'max_frame')
if not m[1] then
  if n > 0 then redis.call('DEL', unpack(tmp)) end
  return redis.error_reply('NOQUEUE no such queue')
end
if n < 1 then return {} end
-- Duplicates: queued or held (in dlv), or acknowledged (bit seq of the
-- bitmap of the epoch and task).
local dlv = pre .. 'dlv'
local held = redis.call('HMGET', dlv, unpack(ids))
local bm = pre .. 'acked:' .. e .. ':' .. t
local acked = redis.call('BITFIELD_RO', bm, unpack(get))
-- A consumer restored these after Redis lost its last writes (restore):
-- 'held' was delivered once already.
local redo = {}
if redis.call('EXISTS', pre .. 'redo') == 1 then
  redo = redis.call('HMGET', pre .. 'redo', unpack(ids))
  for k = 1, n do
    if redo[k] then redis.call('HDEL', pre .. 'redo', ids[k]) end
  end
end
local maxn, maxb = tonumber(m[1]), tonumber(m[2])
local ranks = tonumber(m[3] or '0')
local jf = redis.call('HMGET', pre .. 'jrun', 'epoch_open', 'epochs')
local open = jf[1] and tonumber(jf[1])
local frame_max = tonumber(m[4] or '67108864')
-- The list (or coordinated stage) the batches go to: their epoch's, or
-- the first open epoch's when the end of theirs is posted.
local le = e
if open and redis.call('HEXISTS', pre .. 'eof', e) == 1 then
  le = tostring(math.min(open, tonumber(jf[2]) - 1))
end
-- dlv's field '~' is not a batch: its value, longer than 64 bytes, keeps
-- the hash in Redis's hashtable encoding, where a field costs the same
-- however many the hash holds (in the compact encoding, Redis's default
-- up to 128 small fields, each is a scan of the whole hash). Set with the
-- first batch stored (DLV_PIN in lib.lua).
local pin = '~'
local count = redis.call('HLEN', dlv) - redis.call('HEXISTS', dlv, pin)
local used = tonumber(redis.call('GET', pre .. 'bytes') or '0')
-- Batches of an epoch the trainers have not reached get 3/4 of the
-- budgets, so a task of the current epoch that must be redone finds room.
local ahead = open and tonumber(e) > open
local stage = pre .. 'stage:' .. le
local bp = pre .. 'b:'
local out, gone, seen, list = {}, {}, {}, {}
local fields = {pin, 'not a batch: a value over 64 bytes keeps this hash in the hashtable encoding'}
local pushed, bytes, dups, full, nf = 0, 0, 0, false, 2
for k = 1, n do
  local id = ids[k]
  if not ok[k] then
    out[k] = redis.error_reply('INVALID batch ' .. id .. ': seq not a decimal up to 16777215')
  elseif held[k] or acked[k] == 1 or seen[id] then
    out[k] = 2
    dups = dups + 1
  elseif full then
    out[k] = 0
  else
    local size = redis.call('STRLEN', tmp[k])
    if size == 0 then
      out[k] = redis.error_reply('INVALID no frame in ' .. tmp[k])
    elseif size > frame_max then
      out[k] = redis.error_reply('TOOBIG batch of ' .. size ..
               ' bytes exceeds the queue frame limit of ' .. frame_max)
    elseif size > maxb then
      out[k] = redis.error_reply('TOOBIG batch of ' .. size ..
               ' bytes exceeds the queue byte budget of ' .. maxb)
    else
      -- A push that completes a round of a coordinated queue is taken even
      -- over the budget: the round's other batches wait in stage and only a
      -- full round frees them, so refusing it could stall every rank. So
      -- is every push of a round of the open epoch once begun: later
      -- epochs may hold the rest of the budget, and the trainers free
      -- nothing until that round is out (at most one round above it).
      local staged = ranks > 0 and redis.call('LLEN', stage) or 0
      local completes = ranks > 0 and staged + 1 >= ranks
      local begun = staged > 0 and open ~= nil and tonumber(le) == open
      if not (completes or begun) and not has_room(count, used, size, maxn, maxb, ahead) then
        full = true
        out[k] = 0
      elseif redis.call('RENAMENX', tmp[k], bp .. id) == 0 then
        -- A frame is stored under this id already (not in dlv: a queue
        -- written by hand). RENAMENX: a producer never replaces a frame,
        -- and its ACL role may create b: keys but not overwrite them.
        out[k] = 2
        dups = dups + 1
      else
        out[k] = 1
        seen[id] = true
        count, used = count + 1, used + size
        pushed, bytes = pushed + 1, bytes + size
        fields[nf + 1], fields[nf + 2] = id, redo[k] == 'held' and '1' or '0'
        nf = nf + 2
        if ranks > 0 then
          redis.call('LPUSH', stage, id)
          if completes then
            for r = 0, ranks - 1 do
              redis.call('LMOVE', stage, pre .. 'ready:' .. le .. ':' .. r, 'RIGHT', 'LEFT')
            end
          end
        else
          list[#list + 1] = id
        end
      end
    end
  end
  if out[k] ~= 1 then gone[#gone + 1] = tmp[k] end
end
if #gone > 0 then redis.call('DEL', unpack(gone)) end
if dups > 0 then redis.call('HINCRBY', pre .. 'stats', 'dup_dropped', dups) end
if pushed > 0 then
  redis.call('HSET', dlv, unpack(fields))
  if #list > 0 then redis.call('LPUSH', pre .. 'ready:' .. le, unpack(list)) end
  redis.call('HINCRBY', pre .. 'estats', e .. ':pushed', pushed)
  redis.call('INCRBY', pre .. 'bytes', bytes)
  redis.call('HINCRBY', pre .. 'stats', 'pushed', pushed)
  redis.call('HINCRBY', pre .. 'stats', 'pushed_bytes', bytes)
end
return out
