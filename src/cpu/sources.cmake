# Sources of specdec_cpu (paths relative to src/).
list(APPEND SOURCES cpu/placeholder.cpp)
list(APPEND PUBLIC_LIBS specdec_model)
list(APPEND PRIVATE_LIBS fmt::fmt Eigen3::Eigen Threads::Threads)
