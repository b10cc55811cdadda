# frozen_string_literal: true

module RapidThread
  VERSION = "0.1.0"
end
