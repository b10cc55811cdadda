# frozen_string_literal: true

module RapidThread
  # The handle RapidThread.spawn / Thread.spawn returns: Thread's interface
  # for one block that a cached worker thread runs as if on a fresh thread.
  # The methods not defined here are native (ext/rapid_thread/src/task.rs);
  # docs/api.md documents all of them and how a Task differs from a Thread.
  class Task
    class << self
      undef_method :new
    end

    # Thread#raise: raises the exception in the block (before it starts:
    # instead of it).
    def raise(*args)
      __raise(args)
    end

    # Thread#name=: nil or a String without NUL bytes.
    def name=(name)
      unless name.nil?
        str = String.try_convert(name)
        Kernel.raise TypeError, "no implicit conversion of #{RapidThread.__describe(name)} into String" unless str
        Kernel.raise ArgumentError, "string contains null byte" if str.include?("\0")
        name = -str
      end
      __set_name(name)
    end

    def inspect
      loc = __block&.source_location
      st = status
      st = st ? st : "dead"
      "#<#{self.class}:0x#{format('%016x', object_id)}#{"@#{name}" if name}#{" #{loc[0]}:#{loc[1]}" if loc} #{st}>"
    end
    alias to_s inspect
  end

  class << self
    # How Ruby names a value in "no implicit conversion of X into String".
    def __describe(value) # :nodoc:
      case value
      when nil, true, false then value.inspect
      else value.class.to_s
      end
    end

    # Writes Thread.new's report of a block's unhandled exception (header
    # built natively, with the worker's address and the block's location).
    def __report_exception(header, exception) # :nodoc:
      $stderr.write(header, exception.full_message)
      nil
    end
  end
end
